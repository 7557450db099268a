"""Request latency by request code and response code, in plain ints (the remoting layer's half of
``rocketmq_rpc_latency``; the exporter turns it into a histogram at scrape time, docs/metrics.md)."""

from __future__ import annotations

from bisect import bisect_left

from prometheus_client.core import HistogramMetricFamily, Metric

from tidalmq.remoting.codes import ResponseCode, code_name

# Upper bounds in ms, RocketMQ 5's RemotingMetricsManager buckets (1, 3, 5, 7, 10, 100 ms, 1, 2, 3 s).
LATENCY_BUCKETS_MS: tuple[float, ...] = (1, 3, 5, 7, 10, 100, 1000, 2000, 3000)


class RpcLatencyStats:
    """``record`` costs one dict lookup and a bisect: it runs once per request, never per message."""

    def __init__(self) -> None:
        # (request code, response code) -> counts per bucket (the last one is +Inf), then the sum in ms
        self.series: dict[tuple[int, int], list[float]] = {}

    def record(self, request_code: int, response_code: int, elapsed_ms: float) -> None:
        key = (request_code, response_code)
        row = self.series.get(key)
        if row is None:
            row = self.series[key] = [0] * (len(LATENCY_BUCKETS_MS) + 2)
        row[bisect_left(LATENCY_BUCKETS_MS, elapsed_ms)] += 1
        row[-1] += elapsed_ms

    def snapshot(self) -> dict[tuple[int, int], list[float]]:
        return {k: list(v) for k, v in self.series.items()}


def rpc_latency_family(common: dict[str, str], rpc: dict[tuple[int, int], list[float]]) -> Metric:
    """``rocketmq_rpc_latency`` from a ``snapshot``, with the server's ``common`` labels first."""
    keys = [*common, "protocol_type", "request_code", "response_code"]
    fam = HistogramMetricFamily("rocketmq_rpc_latency", "Request latency in ms, from decoded request to "
                                "response written", labels=keys)
    for (req, resp), row in sorted(rpc.items()):
        cumulative, buckets = 0.0, []
        for bound, n in zip((*LATENCY_BUCKETS_MS, float("inf")), row[:-1], strict=True):
            cumulative += n
            buckets.append(("+Inf" if bound == float("inf") else f"{bound:g}", cumulative))
        fam.add_metric([*common.values(), "remoting", code_name(req).lower(), response_name(resp)], buckets, row[-1])
    return fam


def response_name(code: int) -> str:
    """A response code as RocketMQ's RemotingMetricsConstant labels it: its ResponseCode name, lowercase."""
    try:
        return ResponseCode(code).name.lower()
    except ValueError:
        return str(code)
