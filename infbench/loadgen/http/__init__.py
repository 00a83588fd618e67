"""The load generator's HTTP client: the pool of keep-alive connections (`pool`), one
connection and its response parser (`connection`), the hot path that sends one streaming
request and stamps every socket read (`client`), and the request bodies (`bodies`)."""
