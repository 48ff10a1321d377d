"""The served model, pure (torch and numpy, no Kafka, no Faust): the forecast engine, windows,
micro-batcher, forecast values, explanations, live scoring and online calibration, shared by the
worker's forecast stage (streams.runtime) and `barcast evaluate`."""
