"""The stages: plain typed code over typed records (streams.runtime.records), importing no
Faust and no Kafka. raw record -> clean bar or dead letter (corrections) -> feature row
(features) -> forecast request (windows); each returns the records it publishes."""
