"""Content safety: classifiers behind one interface (rule set, moderation endpoint, guard
model), chosen per tier, checking prompts before admission and answers as they stream."""
