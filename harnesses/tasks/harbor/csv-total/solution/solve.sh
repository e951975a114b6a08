#!/bin/bash
awk -F, 'NR > 1 {s += $2} END {print s}' sales.csv > total.txt
