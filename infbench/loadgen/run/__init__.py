"""One run's machinery: what it is given and shows (`types`), the runner that drives it
(`runner`, `pacer`), finished streams into rows (`recorder`, `stream_rows`) and the column
buffers they fill (`buffers`), the run from store row to status (`execute`, `outcome`),
its stored configuration (`config`) and the client watching itself (`client_health`)."""
