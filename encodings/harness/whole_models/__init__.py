"""Whole models in the harness's call convention: adapters for causal LMs and vision-language models, and where each model relation reaches."""
