"""What a case compares an encoder with and how it calls one: float64 references, calling protocols, input tensors and the calling contract."""
