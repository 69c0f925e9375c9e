"""The users part: users owned by keys, who sees whom, end-user tokens."""
