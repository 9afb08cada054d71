"""How a stream's last symbols are kept: one integer, :data:`CONTEXT_BITS` bits a symbol.

A stream's context code holds its last symbols, newest in the lowest bits, each stored as
its index + 1 (0: no symbol, the stream's start). O(1) memory a stream, whatever the
alphabet up to 2²¹ symbols.
"""

__all__ = ["CONTEXT_BITS", "DIGIT", "UNSEEN"]

CONTEXT_BITS = 22  # bits per symbol in a stream's context code (0: no symbol, the start)
DIGIT = (1 << CONTEXT_BITS) - 1  # the mask of one symbol's bits
UNSEEN = DIGIT - 1  # the index of a label no model knows (above every alphabet: 2²¹ symbols)
