//! CLI handlers (placeholder while the tokenizer core is built).
