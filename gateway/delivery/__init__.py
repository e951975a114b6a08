"""The delivery stage of the call path: answers and streams sent back to the client, and the calls
whose client never received them tagged."""
