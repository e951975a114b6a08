#!/bin/bash
wc -w < story.txt > words.txt
