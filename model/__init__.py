"""The forecasting model: a Temporal Fusion Transformer over the 227 bar features.

config (TFTConfig) · layers + tft (the network) · covariates (static and calendar inputs) ·
bars + dataset + normalization (training data) · train · checkpoint (safetensors) ·
forecaster (inference for the worker) · evaluate + metrics + plots · cli (`barcast train`,
`barcast evaluate`) · synthetic (a learnable panel for tests and benchmarks).
Pure: imports no Faust and no Kafka.
"""
