"""Files an attacker would send: PDFs that cost pypdf seconds of CPU in a few kilobytes, and
imports that are large, deep or inflate a thousandfold. Shared by the tests and
``bench/abuse.py``."""

from __future__ import annotations

import io
import json
import zipfile
import zlib


def pdf_with_shared_stream(pages: int, operators: int) -> bytes:
    """``pages`` pages that all draw one Flate content stream of ``operators`` text-showing
    operators: pypdf parses the stream again for every page, so its cost is pages x
    operators, while the file stays a few kilobytes (the stream compresses ~1000:1)."""
    content = b"BT /F1 1 Tf " + b"(a) Tj " * operators + b"ET"
    stream = zlib.compress(content, 9)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids ["
        + b" ".join(f"{5 + i} 0 R".encode() for i in range(pages))
        + f"] /Count {pages} >>".encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        f"<< /Length {len(stream)} /Filter /FlateDecode >>\nstream\n".encode()
        + stream
        + b"\nendstream",
    ]
    page = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R " + (
        b"/Resources << /Font << /F1 3 0 R >> >> >>"
    )
    objects += [page] * pages
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(f"{number} 0 obj\n".encode() + body + b"\nendobj\n")
    xref = out.tell()
    out.write(f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode())
    for offset in offsets:
        out.write(f"{offset:010d} 00000 n \n".encode())
    out.write(
        f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    )
    return out.getvalue()


def chatgpt_conversations(chats: int, messages: int, text: str = "hello there") -> bytes:
    """A ChatGPT ``conversations.json`` of ``chats`` conversations of ``messages`` turns."""
    conversations = []
    for c in range(chats):
        mapping: dict[str, object] = {
            "root": {"id": "root", "message": None, "parent": None, "children": ["m0"]}
        }
        for m in range(messages):
            mapping[f"m{m}"] = {
                "id": f"m{m}",
                "parent": "root" if m == 0 else f"m{m - 1}",
                "children": [f"m{m + 1}"] if m + 1 < messages else [],
                "message": {
                    "id": f"m{m}",
                    "author": {"role": "user" if m % 2 == 0 else "assistant"},
                    "create_time": 1_700_000_000 + m,
                    "content": {"content_type": "text", "parts": [f"{text} {c}.{m}"]},
                },
            }
        conversations.append(
            {
                "id": f"conv-{c}",
                "title": f"chat {c}",
                "create_time": 1_700_000_000,
                "update_time": 1_700_000_100,
                "current_node": f"m{messages - 1}",
                "mapping": mapping,
            }
        )
    return json.dumps(conversations).encode()


def zip_bomb(inflated: int) -> bytes:
    """A zip whose ``conversations.json`` inflates to ``inflated`` bytes of one JSON array."""
    out = io.BytesIO()
    with (
        zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf,
        zf.open("conversations.json", "w", force_zip64=True) as member,
    ):
        member.write(b"[")
        chunk = b" " * (1 << 20)
        for _ in range(inflated >> 20):
            member.write(chunk)
        member.write(b"]")
    return out.getvalue()
