// placeholder so the kernels library exists before its first file lands
