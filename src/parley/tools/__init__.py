"""Tools a chat's runs can call on the server: fetch a web page, search the user's own chats
(and, as issue 43 goes on, MCP servers and a sandboxed code interpreter)."""
