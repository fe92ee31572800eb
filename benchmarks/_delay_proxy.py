"""A TCP proxy that adds round-trip delay, in a process of its own (for loop_stall.py):
a bucket in another region, seen from here.

    python benchmarks/_delay_proxy.py LISTEN_PORT TARGET_HOST TARGET_PORT RTT_MS

Each chunk is passed on half the round trip after it arrived, in order, both ways.
"""

from __future__ import annotations

import asyncio
import sys


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    loop = asyncio.get_running_loop()
    try:
        while data := await reader.read(65536):
            loop.call_later(delay, writer.write, data)
        await asyncio.sleep(delay)
    finally:
        writer.close()


async def main(listen: int, host: str, port: int, rtt: float) -> None:
    async def carry(client_reader, client_writer):
        server_reader, server_writer = await asyncio.open_connection(host, port)
        await asyncio.gather(pipe(client_reader, server_writer, rtt / 2),
                             pipe(server_reader, client_writer, rtt / 2),
                             return_exceptions=True)  # fmt: skip

    server = await asyncio.start_server(carry, "127.0.0.1", listen)
    print("listening", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    listen, host, port, rtt_ms = sys.argv[1:5]
    asyncio.run(main(int(listen), host, int(port), float(rtt_ms) / 1000))
