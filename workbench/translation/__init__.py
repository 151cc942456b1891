"""Translation: Multi30k data, BPE tokenizer, batching, the training recipe, checkpoints, decoding, metrics, shipped models."""
