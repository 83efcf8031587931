"""`whatif --traffic` names a regular file: a FIFO (which would wait for a writer), a socket or
a device is refused before any read, each in a child with a deadline so that a regression fails
instead of hanging the suite; and answers logged as ids only, or as empty turns."""

from __future__ import annotations

import json
from typing import Any

from vllm_specdec_plugin.inputs.traffic import parse_traffic_chunks


def parse(*entries: Any) -> Any:
    return parse_traffic_chunks([b"\n".join(json.dumps(e).encode() for e in entries) + b"\n"],
                                "t.jsonl")


def test_fifos_sockets_and_devices_are_refused_before_any_read(tmp_path):
    """A FIFO without a writer once hung `whatif` in its open; in a child with a deadline,
    so a regression fails instead of hanging the suite."""
    import os
    import socket

    from support.bounded import run_bounded

    fifo, sock = tmp_path / "t.fifo", tmp_path / "t.sock"
    os.mkfifo(fifo)
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock))
    (tmp_path / "link.jsonl").symlink_to(fifo)
    try:
        done = run_bounded(f"""
            from vllm_specdec_plugin.inputs.traffic import TrafficError, read_traffic
            for path in ({str(fifo)!r}, {str(tmp_path / "link.jsonl")!r}, {str(sock)!r},
                         "/dev/zero", "/dev/null"):
                try:
                    read_traffic(path)
                except TrafficError as exc:
                    print(exc.message)
            """, timeout_s=30)
    finally:
        server.close()
    fix = ("give the path of a JSONL or ShareGPT JSON traffic file (save what it streams to a "
           "file first)")
    assert not done.timed_out and done.returncode == 0, done
    assert done.stdout.splitlines() == [
        f"--traffic '{fifo}' is a FIFO (named pipe); {fix}",
        f"--traffic '{tmp_path / 'link.jsonl'}' is a FIFO (named pipe); {fix}",
        f"--traffic '{sock}' is a socket; {fix}",
        f"--traffic '/dev/zero' is a character device; {fix}",
        f"--traffic '/dev/null' is a character device; {fix}"]


def test_a_regular_file_swapped_for_a_fifo_after_the_check_is_still_refused(tmp_path):
    """`open_regular` checks the type again on the open descriptor (opened non-blocking), so
    a FIFO put in place after the `stat` is refused too. In a child with a deadline (a
    regression would block in the open)."""
    import os

    from support.bounded import run_bounded

    fifo = tmp_path / "t.fifo"
    os.mkfifo(fifo)
    done = run_bounded(f"""
        import os, stat
        from pathlib import Path
        from vllm_specdec_plugin.inputs import files

        regular = os.stat_result((stat.S_IFREG | 0o644, *os.stat({str(fifo)!r})[1:]))

        class StatSaysRegular:  # the module's `os`, whose stat lies about the path
            def __getattr__(self, name):
                return getattr(os, name)

            @staticmethod
            def stat(path, *args, **kwargs):
                return regular

        files.os = StatSaysRegular()
        try:
            files.open_regular(Path({str(fifo)!r}))
        except files.NotRegularFile as exc:
            print(exc.kind)
        """, timeout_s=20)
    assert not done.timed_out and done.stdout.strip() == "a FIFO (named pipe)", done


def test_answers_logged_as_ids_only_and_empty_turns():
    traffic = parse({"prompt": "p", "completion": "", "completion_token_ids": [5, 6]},
                    {"conversations": [{"from": "human", "value": "q"},
                                       {"from": "gpt", "value": ""},
                                       {"from": "human", "value": "q2"},
                                       {"from": "gpt", "value": "a2"}]})
    assert [(r.line, r.completion, r.completion_token_ids) for r in traffic.records] == [
        (1, "", (5, 6)), (2, "a2", None)]
    assert traffic.skipped == 0


def test_reading_says_its_progress_in_mib_up_to_the_files_size(tmp_path):
    """A large file is read with a count (whatif's "read (MiB)" bar): one call a MiB chunk,
    reaching the file's size in MiB."""
    from vllm_specdec_plugin.inputs.traffic import read_traffic

    line = b'{"prompt": "' + b"x" * 1000 + b'", "completion": "y"}\n'
    path = tmp_path / "big.jsonl"
    path.write_bytes(line * (5 * 1024 * 1024 // 2 // len(line) + 1))  # just over 2.5 MiB
    seen: list[tuple[int, int]] = []
    read_traffic(path, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(1, 3), (2, 3), (3, 3)]
