"""Tokens and the text they append: where the vocabularies of different models meet.

``key_table`` (each token's key: the exact text it appends; tokenization with character spans), ``response``
(one model's tokens of the shared response text, re-sync; torch-free), ``distribution`` (a next-token
distribution as the methods read it, in process or from a member process) and ``align`` (how several
tokenizers cut one text).
"""
