"""Files attached to a chat's message: read by content (``extract``), kept in the blob store
with their text in ``attachments`` (``service``), and sent to the model with the message
they ride on (``prompt``)."""
