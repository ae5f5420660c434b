"""One run: why it runs (its decision, its tags), what it cost and bought, what happened before
(history, outages, lost commit races). Imports the kinds (core/operations.py) and what lies below."""
