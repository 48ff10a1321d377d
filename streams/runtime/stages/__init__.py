"""The stages: plain typed code over typed records (streams.runtime.records), importing no
Faust and no Kafka; each returns the records it publishes."""
