//! Tokenizer verification (issue 7): known traces first; goldens from the reference follow.

use mk::tokenizer::Tokenizer;

#[test]
fn known_traces() {
    let t = Tokenizer::qwen35().unwrap();
    assert_eq!(t.encode("<|im_start|>assistant\n").unwrap(), vec![248045, 74455, 198]);
    assert_eq!(
        t.encode("<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n").unwrap(),
        vec![248045, 846, 198, 9419, 248046, 198, 248045, 74455, 198, 248068, 271, 248069, 271]
    );
    assert_eq!(
        t.encode("Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ").unwrap(),
        vec![9419, 0, 220, 97169, 97621, 6115, 16, 478, 220, 16, 283, 220, 17, 9551, 254, 68933, 128, 97, 91914, 28495, 68933, 128, 105, 68933, 128, 95]
    );
}
