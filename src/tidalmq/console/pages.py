"""HTML of the console's pages. Everything shown passes through ``esc``: topic names, keys, message bodies
and properties are the senders' text, and a client can send any bytes (a body of ``<script>`` must show as
text, never run: tests/console/test_console.py::test_an_xss_payload_in_a_message_is_shown_escaped)."""

from __future__ import annotations

import html
import time
from collections.abc import Iterable

from tidalmq.client.message import MessageExt

NAV = (("/", "Cluster"), ("/topics", "Topics"), ("/groups", "Groups"), ("/messages", "Messages"),
       ("/dlq", "Dead letters"), ("/schedule", "Scheduled"))
BODY_SHOWN = 4096  # bytes of a body shown on a page

STYLE = """
body{font-family:system-ui,sans-serif;margin:0;color:#1c2733;background:#f6f8fa}
header{background:#12355b;color:#fff;padding:.6em 1.2em;display:flex;gap:1.4em;align-items:center}
header a{color:#cfe3ff;text-decoration:none}header a.on{color:#fff;font-weight:600}
main{padding:1em 1.4em}table{border-collapse:collapse;background:#fff;margin:.5em 0 1.2em}
td,th{border:1px solid #d0d7de;padding:.3em .6em;text-align:left;vertical-align:top;font-size:.92em}
th{background:#eef2f6}tr.detail td{border-bottom:2px solid #8aa4c2}tr.detail td:last-child{background:#fbfcfd}pre{white-space:pre-wrap;word-break:break-all;margin:0;max-width:60em}
form.inline{display:inline}.notice{background:#e6f4ea;border:1px solid #a7d3b2;padding:.5em;margin:.5em 0}
.error{background:#fdecea;border:1px solid #f1aeb5;padding:.5em;margin:.5em 0}
.bar{background:#3c7dd9;height:.9em;display:inline-block;vertical-align:middle}
input,button,select{font-size:.95em;margin:.15em}fieldset{background:#fff;border:1px solid #d0d7de;margin:.6em 0}
"""


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def when(ms: int | str | None) -> str:
    try:
        n = int(ms or 0)
    except ValueError:
        return esc(ms)
    if n <= 0:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(n / 1000)) + f".{n % 1000:03d}"


def table(header: Iterable[str], rows: Iterable[Iterable[str]], cls: str = "") -> str:
    """Cells are HTML already (escape what goes in)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{esc(cls)}"><tr>{head}</tr>{body}</table>'


def hidden(name: str, value: str) -> str:
    return f'<input type="hidden" name="{esc(name)}" value="{esc(value)}">'


def post_form(action: str, csrf: str, fields: str, button: str, form_id: str = "") -> str:
    """A state-changing form: POST with the CSRF token."""
    ident = f' id="{esc(form_id)}"' if form_id else ""
    return (f'<form class="inline" method="post" action="{esc(action)}"{ident}>{hidden("csrf", csrf)}'
            f'{fields}<button type="submit">{esc(button)}</button></form>')


def layout(path: str, title: str, content: str, notice: str = "", error: str = "") -> str:
    nav = "".join(f'<a href="{href}"{" class=on" if href == path else ""}>{name}</a>' for href, name in NAV)
    return (f"<!doctype html><html><head><meta charset=utf-8><title>{esc(title)} · TidalMQ</title>"
            f"<style>{STYLE}</style></head><body><header><strong>TidalMQ</strong>{nav}</header>"
            f"<main><h2>{esc(title)}</h2>{flash(notice, error)}{content}</main></body></html>")


def flash(notice: str, error: str) -> str:
    """What an action did (notice) or why it was refused (error)."""
    return (f'<div class="notice" id="notice">{esc(notice)}</div>' if notice else "") + (
        f'<div class="error" id="error">{esc(error)}</div>' if error else "")


def body_text(body: bytes) -> str:
    shown = body[:BODY_SHOWN].decode("utf-8", "replace")
    more = f"\n… {len(body) - BODY_SHOWN} more bytes" if len(body) > BODY_SHOWN else ""
    return f"<pre class=body>{esc(shown + more)}</pre>"


TIME_PROPERTIES = ("TIMER_OUT_MS", "TIMER_DELIVER_MS")  # epoch ms: also shown as a date


def properties(props: dict[str, str]) -> str:
    return "<br>".join(f"<code>{esc(k)}</code>={esc(v)}" + (f" ({esc(when(v))})" if k in TIME_PROPERTIES else "")
                       for k, v in sorted(props.items()))


def messages(msgs: list[MessageExt], actions: dict[str, str] | None = None) -> str:
    """Two rows per message: its ids and place, then its properties and body. ``actions`` adds a cell
    (HTML) per message, keyed by its offset id."""
    if not msgs:
        return "<p id=nothing>No message found.</p>"
    header = ["Message id / offset id", "Topic / queue / offset", "Stored", "Tags", "Keys", ""]
    rows = []
    for m in msgs:
        ids = f"{esc(m.properties.get('UNIQ_KEY', ''))}<br><small>{esc(m.offset_msg_id)}</small>"
        action = (actions or {}).get(m.offset_msg_id, "")
        rows.append(f"<tbody class=message><tr><td>{ids}</td><td>{esc(m.topic)} / {m.queue_id} / {m.queue_offset}</td>"
                    f"<td>{esc(when(m.store_timestamp))}</td><td>{esc(m.tags or '')}</td>"
                    f"<td>{esc(' '.join(m.keys))}</td><td>{action}</td></tr>"
                    f"<tr class=detail><td colspan=2>{properties(m.properties)}</td>"
                    f"<td colspan=4>{body_text(m.body)}</td></tr></tbody>")
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    return f'<table class="messages"><thead><tr>{head}</tr></thead>{"".join(rows)}</table>'


def histogram(hist: dict[str, int], buckets: list[str]) -> str:
    top = max(hist.values(), default=0) or 1
    return "<br>".join(f'<span class="bar" style="width:{int(120 * hist.get(b, 0) / top)}px"></span> '
                       f"{esc(b)}: {hist.get(b, 0)}" for b in buckets)
