"""Archive: chats idle past ``archive.after_days`` move from the database to the blob store
(``archiver.Archiver``), stay readable there, and come back when written to."""
