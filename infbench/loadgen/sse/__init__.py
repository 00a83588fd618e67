"""Parsing a recorded stream into SSE events and request facts, after the request ended (off
the hot path): what the events carry (`events`), the per-event parser (`parser`) and the
array parser for the common shape (`fast`)."""
