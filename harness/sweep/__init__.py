"""What a sweep is: its axes' and settings' tables, presets, sweep files and front-end options."""
