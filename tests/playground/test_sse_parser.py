"""The page's SSE reader (playground/static/js/sse.js), run in Chromium on crafted network reads.

The HTML standard's rules: a line ends in LF, CRLF or CR, a CRLF may be split across two reads,
``:`` starts a comment, a blank line ends an event, ``id`` is remembered. A read of thousands of
events (what a browser that fell behind the stream receives at once) yields all of them, in order.
"""

from __future__ import annotations

READ_ALL = """async (reads) => {
  const { sseBatches } = await import(new URL("js/sse.js", document.baseURI).href);
  const encoder = new TextEncoder();
  const body = new ReadableStream({
    start(controller) {
      for (const read of reads) controller.enqueue(encoder.encode(read));
      controller.close();
    },
  });
  const events = [];
  for await (const batch of sseBatches(new Response(body))) events.push(...batch);
  return events;
}"""


async def read_events(visit, reads: list[str]) -> list[dict]:
    return await visit.page.evaluate(READ_ALL, reads)


async def test_lf_crlf_and_cr_line_ends_and_comments(fake_engine_gateway, open_playground):
    visit = await open_playground(fake_engine_gateway)
    events = await read_events(visit, [
        ": keep-alive\n\n",
        "id: s:0\ndata: one\n\n",
        "id: s:1\r\ndata: two\r\n\r\n",
        "id: s:2\rdata: three\r\r",
        "event: note\ndata: a\ndata: b\n\n",
    ])
    assert events == [
        {"id": "s:0", "type": "message", "data": "one"},
        {"id": "s:1", "type": "message", "data": "two"},
        {"id": "s:2", "type": "message", "data": "three"},
        {"id": "s:2", "type": "note", "data": "a\nb"},  # the last id stays
    ]


async def test_a_crlf_split_across_two_reads_is_one_line_end(fake_engine_gateway, open_playground):
    visit = await open_playground(fake_engine_gateway)
    # Were the CR at the end of a read taken as a line end, the LF after it would be a blank
    # line: the event would end after "x", and "y" would be an event of its own.
    events = await read_events(visit, ["data: x\r", "\ndata: y\r\n\r", "\n"])
    assert events == [{"id": None, "type": "message", "data": "x\ny"}]


async def test_one_read_of_thousands_of_events_yields_them_all_in_order(fake_engine_gateway, open_playground):
    visit = await open_playground(fake_engine_gateway)
    count = 5000
    read = "".join(f'id: s:{i}\ndata: {{"n": {i}}}\n\n' for i in range(count))
    events = await read_events(visit, [read[:len(read) // 2], read[len(read) // 2:]])
    assert [event["id"] for event in events] == [f"s:{i}" for i in range(count)]
    assert events[-1]["data"] == f'{{"n": {count - 1}}}'
