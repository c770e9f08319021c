// placeholder so the weights library exists before its first file lands
