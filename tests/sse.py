"""Server-sent events (the live log, the job and team streams) as tests read them from a streamed response."""

from __future__ import annotations


def events(response) -> list[dict]:
    """The server-sent events of a streamed response, as dicts of their fields."""
    text = b"".join(response.streaming_content).decode()
    parsed = []
    for block in text.split("\n\n"):
        fields: dict = {}
        for line in block.splitlines():
            key, _, value = line.partition(": ")
            fields[key] = f"{fields[key]}\n{value}" if key in fields else value
        if fields:
            parsed.append(fields)
    return parsed
