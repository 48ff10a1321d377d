"""The stream runtime: what the worker's agents share (see streams.runtime.observers)."""
