"""Sessions, resumable generations: the event log a run writes into, stores, followers, resume and cancel."""
