-- `speccat show`: the settings of the grid that match the chosen fields (the view
-- chosen_settings reads seq_length [4096], micro_batch [1], tp [1], cp [1]).
SELECT * FROM chosen_settings
ORDER BY setting_id;
