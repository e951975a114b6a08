def gcd(a, b):
    return a * b
