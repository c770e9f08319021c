// placeholder so the engine library exists before its first file lands
