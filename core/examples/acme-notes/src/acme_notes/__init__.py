"""acme_notes: an example Antler plugin distribution (the template a new author copies)."""
