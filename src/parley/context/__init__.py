"""Context management for long chats: the prompt assembled under a token budget (system
prompt, rolling summary, retrieved snippets, recent turns, the new message), the rolling
summary's background folds, and retrieval over a chat's older messages."""
