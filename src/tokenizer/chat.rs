//! Chat template (placeholder while the tokenizer core is built).
