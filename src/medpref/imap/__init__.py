"""imapScore (Wang et al.): imap extraction, value relations, Eq. 1, and its validation
against human scores (stage 07)."""
