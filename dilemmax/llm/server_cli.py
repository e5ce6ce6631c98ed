"""``python -m dilemmax.llm.server_cli --reply TEXT``: the local test server as a process of its
own, serving one fixed reply until killed (a stand-in model for benchmarks and demos)."""

from __future__ import annotations

import argparse
import threading

from dilemmax.llm.server import LocalChatServer


def main(argv: list[str] | None = None) -> None:
    """Serves ``--reply`` to every call; prints the base URL on its first line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reply", default="ACTION QUERY", help="the text every call gets")
    args = parser.parse_args(argv)
    server = LocalChatServer(lambda body: args.reply).start()
    print(server.base_url, flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
