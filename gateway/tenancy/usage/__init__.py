"""The usage ledger: what each key, team, end user and model used, per hour, and what it cost.

``prices`` (the optional price table), ``ledger`` (recording off the request path, written in
batches), ``report`` (the sums the admin API and ``/v1/usage`` answer with).
"""
