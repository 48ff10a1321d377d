"""The forecast worker's pure parts: window buffers, the micro-batcher, the inference engine."""
