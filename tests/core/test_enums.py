"""Enum members equal the strings the registry stores, so old rows read back unchanged."""

from __future__ import annotations

from freshindex.core.enums import BlockKind, BuildStatus, RunStatus
from freshindex.core.errors import DocumentError
from freshindex.core.exit_codes import ExitCode
from freshindex.registry import TRANSIENT_REASONS
from freshindex.workers.connectors.retry import FETCH_FAILED
from freshindex.workers.parsing import Parsers


def test_members_equal_the_stored_strings() -> None:
    assert RunStatus.SUCCEEDED == "succeeded" and BuildStatus.PENDING == "pending"
    assert [str(k) for k in BlockKind] == ["heading", "paragraph", "list", "table", "table_row", "code",
                                            "admonition"]


def test_exit_codes_keep_their_numbers() -> None:
    assert [int(c) for c in ExitCode] == [0, 1, 2, 3, 4]
    assert ExitCode.VERIFICATION_HELD == 3 and ExitCode.DELETIONS_HELD == 4


def test_document_reasons_have_one_home() -> None:
    assert FETCH_FAILED is DocumentError.FETCH_FAILED == "fetch_failed"
    # ACL sidecars and the permission service heal on the next sync like a flaky fetch
    assert TRANSIENT_REASONS == {DocumentError.UNREADABLE, DocumentError.VANISHED, DocumentError.FETCH_FAILED,
                                 DocumentError.ACL_INVALID, DocumentError.ACL_UNAVAILABLE}


def test_parsers_emit_only_block_kinds() -> None:
    # Given documents of every parser's format (a table, a quote, a caption, code)
    samples = {
        "a.md": b"# T\n\n> quoted\n\n```py\nx = 1\n```\n\n- item\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n!!! note\n    n\n",
        "b.html": b"<h1>T</h1><p>p</p><blockquote>q</blockquote><table><caption>c</caption><tr><th>a</th></tr>"
                  b"<tr><td>1</td></tr></table><pre><code>x</code></pre><ul><li>i</li></ul>",
        "c.csv": b"a,b\n1,2\n3,4\n",
        "d.py": b"def f():\n    return 1\n",
        "e.txt": b"plain text\n\nmore",
    }
    parsers = Parsers()
    kinds = set()
    for key, data in samples.items():
        kinds |= {b.kind for b in parsers.parse(data, key).blocks}
    # Then every kind is a BlockKind (and the common ones all occur)
    assert kinds <= set(BlockKind)
    assert {BlockKind.HEADING, BlockKind.PARAGRAPH, BlockKind.TABLE, BlockKind.TABLE_ROW, BlockKind.CODE,
            BlockKind.ADMONITION, BlockKind.LIST} <= kinds
