"""Branches: a chat's messages form a tree by ``parent_id``; the chat shows one path, from
``chats.active_leaf_id`` up to the root. Editing a user message adds a sibling (the same
parent) with the new text; regenerating an answer adds a sibling answer. The history, the
prompt and a shared snapshot follow the active path only.

A chat's tree is read whole, as (id, parent, seq) triples: a few bytes a message, one query,
so a path is walked in memory (no recursive SQL, the same on SQLite and Postgres).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from parley.store.schema import Chat, Message

ACTIVE = "<active>"
"""A new message's place when it follows the branch shown (a plain send)."""


@dataclass(frozen=True, slots=True)
class Node:
    id: str
    parent_id: str | None
    seq: int


@dataclass(frozen=True, slots=True)
class Tree:
    """A chat's messages as a tree: every node, and the active path (root first)."""

    nodes: dict[str, Node]
    children: dict[str | None, list[Node]]  # by parent, oldest first
    path: list[Node]

    @property
    def path_ids(self) -> list[str]:
        return [n.id for n in self.path]

    @property
    def leaf_id(self) -> str | None:
        return self.path[-1].id if self.path else None

    def siblings(self, message_id: str) -> list[Node]:
        """The message and its siblings (the same parent), oldest first."""
        return self.children.get(self.nodes[message_id].parent_id, [])

    def position(self, message_id: str) -> tuple[int, int]:
        """(1-based position among its siblings, how many siblings)."""
        siblings = self.siblings(message_id)
        return [n.id for n in siblings].index(message_id) + 1, len(siblings)

    def path_to(self, message_id: str | None) -> list[Node]:
        """The branch from the root down to ``message_id`` (None: nothing), root first."""
        path: list[Node] = []
        seen: set[str] = set()
        while message_id is not None and message_id in self.nodes and message_id not in seen:
            seen.add(message_id)
            path.append(self.nodes[message_id])
            message_id = self.nodes[message_id].parent_id
        return path[::-1]

    def at_seq(self, seq: int) -> Node | None:
        return next((n for n in self.nodes.values() if n.seq == seq), None)

    def prompt_path(self, *, after: str | None, before_seq: int | None) -> list[Node]:
        """The messages a prompt's history is read from: the branch ending at ``after``
        (a new message's place), or above the message at ``before_seq`` (a stored run's),
        else (``after`` is ACTIVE) the branch shown."""
        if after != ACTIVE:
            return self.path_to(after)
        if before_seq is not None:
            node = self.at_seq(before_seq)
            return self.path_to(node.parent_id) if node is not None else []
        return self.path

    def newest_leaf_under(self, message_id: str) -> str:
        """The leaf reached from ``message_id`` by always taking the newest child."""
        current = message_id
        while self.children.get(current):
            current = self.children[current][-1].id
        return current


def build_tree(nodes: Sequence[Node], leaf_id: str | None) -> Tree:
    by_id = {n.id: n for n in nodes}
    children: dict[str | None, list[Node]] = {}
    for node in sorted(nodes, key=lambda n: n.seq):
        children.setdefault(node.parent_id, []).append(node)
    if leaf_id not in by_id:  # no leaf recorded: the newest message's branch
        leaf_id = max(nodes, key=lambda n: n.seq).id if nodes else None
    path: list[Node] = []
    seen: set[str] = set()
    current = leaf_id
    while current is not None and current in by_id and current not in seen:
        seen.add(current)
        path.append(by_id[current])
        current = by_id[current].parent_id
    return Tree(nodes=by_id, children=children, path=path[::-1])


async def chat_tree(s: AsyncSession, chat: Chat) -> Tree:
    rows = await s.execute(
        select(Message.id, Message.parent_id, Message.seq).where(
            Message.user_id == chat.user_id, Message.chat_id == chat.id
        )
    )
    return build_tree([Node(i, p, seq) for i, p, seq in rows], chat.active_leaf_id)


async def set_active_leaf(s: AsyncSession, chat: Chat, leaf_id: str | None) -> None:
    await s.execute(
        update(Chat)
        .where(Chat.user_id == chat.user_id, Chat.id == chat.id)
        .values(active_leaf_id=leaf_id)
    )
    chat.active_leaf_id = leaf_id
