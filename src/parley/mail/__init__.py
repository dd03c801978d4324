"""Mail to users (password resets, email confirmation, notices): SMTP through aiosmtplib,
sent from an outbox in the database so a mail server that is down loses nothing."""
