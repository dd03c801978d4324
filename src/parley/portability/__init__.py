"""A user's chats out of parley and into it (issue 20): pure data formats, no I/O.

* ``document``: parley's export document (``ExportDocument``, one ``ChatDocument`` a chat,
  every message and run's metadata), built from the store's rows; and the plain records an
  import hands to the store (``ImportBatch`` of ``ImportedChat`` of ``ImportedMessage``);
* ``markdown``: a chat as Markdown (``chat_markdown``);
* ``chatgpt``: ChatGPT's export (``conversations.json`` or its split ``conversations-NNN.json``
  files) read into import records, the branch that was shown only;
* ``reader``: ``read_import`` tells the formats apart by their content (a zip, a JSON array,
  a parley export object) and reads any of them, within limits.

The store writes what an import read (``store/imports.py``) and reads a user's rows for an
export chat by chat (``store/exports.py``).
"""
