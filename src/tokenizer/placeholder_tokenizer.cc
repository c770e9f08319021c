// placeholder so the tokenizer library exists before its first file lands
