// placeholder so the ir library exists before its first file lands
