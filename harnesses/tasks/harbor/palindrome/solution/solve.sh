#!/bin/bash
printf 'def is_palindrome(s):\n    return s == s[::-1]\n' > pal.py
