"""What is recorded beside the requests while a run goes: the target's `/metrics` and step log
(`scrape`), the memory ledger picked from them (`memory_ledger`), the run's own series
served live (`exposition`) and the live watch for incidents (`watch`)."""
