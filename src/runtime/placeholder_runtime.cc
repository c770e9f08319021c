// placeholder so the runtime library exists before its first file lands
