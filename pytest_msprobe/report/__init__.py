"""CSV writers and readers: accuracy-check result/details, NPU-vs-GPU compare."""
