"""The playground: a web page, served by the gateway, that shows what the gateway does."""
