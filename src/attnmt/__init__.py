"""attnmt: neural machine translation built around attention."""
