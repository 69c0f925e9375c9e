"""``/api/chat``: a user's question answered by the engine from real, in-stock, nearby products
(``service``, streamed by ``streaming``), with a prompt that keeps untrusted text as data
(``prompt``); and the conversations (a user's chat threads) with their messages
(``models``, ``conversations``)."""
