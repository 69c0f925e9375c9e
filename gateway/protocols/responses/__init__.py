"""OpenAI's Responses API over the engine: stored responses, durable background runs, resumable streams."""
