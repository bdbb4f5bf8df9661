"""The metrics exporter (issue 17): `kimik3 metrics-serve NAME`, one Prometheus port for a whole deployment.

`collect.DeploymentCollector` reads everything through the ports at scrape time (state records,
the container, NVML, /proc, the server's /metrics and /slots) and yields prometheus_client metric
families; `server_series` re-labels the server's own exposition; `proxy_observe` is the pure part
of the latency proxy. Serving over HTTP (and the proxy's sockets) is an adapter
(adapters/metrics_http.py): this layer never imports an HTTP library.
"""
