"""Data: parallel corpora, subword models and batches."""
