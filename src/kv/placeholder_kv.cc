// placeholder so the kv library exists before its first file lands
